"""The status answer of the control socket: what `appliance status` shows, as one JSON object.

Shape (every key always present; times in seconds; sizes in bytes):
    server_name, server_id, version, appliance_version, start (RFC 3339 UTC), uptime_s,
    health ("ok" | "degraded" | "down"), reasons [str], client_url, http_url (or null),
    control_socket,
    supervisor {pid, state, cpu_percent, rss_bytes, restarts_in_window, restart_budget, restart_window_s},
    workers [{index, pid, state, core, numa_node, cpu_percent, rss_bytes, connections,
              msgs_in, msgs_out, bytes_in, bytes_out, heartbeat_age_s, ring_fill, restarts, uptime_s}],
    routes [{url, configured, peer, state (up|down|refused|self), for_s, reason, rtt_ms (or null)}]
    (empty when not clustered; see route_status.py),
    jetstream {clustered, meta_leader, groups, no_quorum [str], lagging [str], under_replicated [str]}
    (null unless JetStream runs clustered; see cluster_status.py)
A worker slot without a process (waiting to restart) has pid 0 and heartbeat_age_s null.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from appliance.supervisor.health import Health
from appliance.supervisor.status_table import RowSnapshot, WorkerState

JsonObject = dict[str, object]
_ALIVE = (WorkerState.STARTING, WorkerState.READY, WorkerState.STOPPING, WorkerState.LAME_DUCK)


@dataclass(frozen=True, slots=True)
class ProcessSample:
    cpu_percent: float = 0.0
    rss_bytes: int = 0


def rfc3339(wall_s: float) -> str:
    seconds = int(wall_s)
    micros = int((wall_s - seconds) * 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"


def worker_entry(row: RowSnapshot, sample: ProcessSample, *, now_mono_s: float) -> JsonObject:
    alive = row.state in _ALIVE and row.pid > 0
    return {
        "index": row.index,
        "pid": row.pid if alive else 0,
        "state": row.state.name.lower(),
        "core": row.core,
        "numa_node": row.numa_node,
        "cpu_percent": round(sample.cpu_percent, 1) if alive else 0.0,
        "rss_bytes": sample.rss_bytes if alive else 0,
        "connections": row.connections,
        "msgs_in": row.msgs_in,
        "msgs_out": row.msgs_out,
        "bytes_in": row.bytes_in,
        "bytes_out": row.bytes_out,
        "heartbeat_age_s": round(max(0.0, now_mono_s - row.heartbeat_mono_s), 3) if alive else None,
        "ring_fill": round(row.ring_fill, 4),
        "restarts": row.restarts,
        "uptime_s": round(max(0.0, now_mono_s - row.started_mono_s), 3) if alive else 0.0,
    }


def status_report(
    *,
    identity: JsonObject,
    health: Health,
    supervisor: JsonObject,
    workers: list[JsonObject],
    start_wall_s: float,
    now_wall_s: float,
    routes: list[JsonObject] | None = None,
    jetstream: JsonObject | None = None,
) -> JsonObject:
    return {
        **identity,
        "start": rfc3339(start_wall_s),
        "uptime_s": round(max(0.0, now_wall_s - start_wall_s), 3),
        "health": health.level,
        "reasons": list(health.reasons),
        "supervisor": supervisor,
        "workers": workers,
        "routes": routes or [],
        "jetstream": jetstream,
    }
